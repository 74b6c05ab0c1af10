// Bad input to the driftcheck binary gets exit 2 and one line naming the file (and the line and field), never
// exit 3, a crash or a silent pass (docs/CAMPAIGN.md "Exit codes and errors"): flag values, --out, a campaign
// directory in use, corrupted, truncated or concatenated journals, and corrupted bundles.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "campaign_files.hpp"
#include "driftcheck_process.hpp"

namespace driftcheck::testing {
namespace {

using nlohmann::json;

Outcome run(const std::vector<std::string>& args) {
  Child c(args);
  return c.wait();
}

fs::path fresh(const std::string& name) {
  const auto dir = scratch() / name;
  fs::remove_all(dir);
  return dir;
}

// Exit 2 with exactly one line on stderr that mentions each of `mentions`.
void expect_bad_input(const std::vector<std::string>& args, const std::vector<std::string>& mentions) {
  const Outcome r = run(args);
  std::string cmd;
  for (const auto& a : args) cmd += a + " ";
  EXPECT_EQ(r.code, 2) << cmd << "\n" << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << cmd << ": " << r.err;
  for (const auto& m : mentions)
    EXPECT_NE(r.err.find(m), std::string::npos) << cmd << ": " << r.err << " lacks " << m;
}

// The reference's environment (docs/REFERENCE.md "When"): a malformed value is refused before anything runs,
// never read as the default.
TEST(Environment, AMalformedReferenceSettingIsExitTwo) {
  const auto out = fresh("reference_env");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"DRIFTCHECK_REFERENCE=gpus", "DRIFTCHECK_REFERENCE=gpus is not one of cpu, gpu, auto"},
      {"DRIFTCHECK_REFERENCE_GPU_WORK=1e6", "DRIFTCHECK_REFERENCE_GPU_WORK=1e6 is not a positive integer"},
      {"DRIFTCHECK_REFERENCE_GPU_WORK=0", "DRIFTCHECK_REFERENCE_GPU_WORK=0 is not a positive integer"},
  };
  for (const auto& [env, message] : cases) {
    ChildOptions o;
    o.env = {env};
    Child c({"fuzz", "--op", "concat", "--cases", "4", "--out", out.string()}, o);
    const Outcome r = c.wait();
    EXPECT_EQ(r.code, 2) << env << ": " << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << env << ": a refused run wrote " << out;
  }
  ChildOptions valid;
  valid.env = {"DRIFTCHECK_REFERENCE=cpu", "DRIFTCHECK_REFERENCE_GPU_WORK=4096"};
  Child ok({"fuzz", "--op", "concat", "--cases", "4", "--out", out.string()}, valid);
  EXPECT_NE(ok.wait().code, 2) << "valid settings run";
}

TEST(Flags, ValuesThatMakeNoCampaignAreExitTwoAndCreateNothing) {
  const auto out = fresh("flags");
  const auto fuzz = [&](std::vector<std::string> more) {
    std::vector<std::string> args{"fuzz", "--out", out.string()};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  expect_bad_input(fuzz({"--seed", "-1"}), {"--seed", "not a non-negative integer"});
  expect_bad_input(fuzz({"--cases", "18446744073709551616"}), {"--cases", "64 bits"});
  expect_bad_input(fuzz({"--cases", "-5"}), {"--cases"});
  expect_bad_input(fuzz({"--shrink-seconds", "inf"}), {"--shrink-seconds", "finite"});
  expect_bad_input(fuzz({"--seconds", "inf"}), {"--seconds", "finite"});
  expect_bad_input(fuzz({"--seconds", "5", "--shrink-seconds", "5"}),
                   {"--shrink-seconds", "less than --seconds"});
  expect_bad_input(fuzz({"--seconds", "nan"}), {"--seconds"});
  expect_bad_input({"fuzz", "--out", ""}, {"--out", "empty"});
  expect_bad_input(
      {"replay", "--seed", "1", "--case", "-1", "--op", "rmsnorm", "--backend", "cpu.rmsnorm.cuda"},
      {"--case"});
  expect_bad_input({"compare", "cpu.dual.fused", "cpu.dual.fused", "--first", "-3"},
                   {"--first", "not a non-negative integer"});
  expect_bad_input({"compare", "cpu.dual.fused", "cpu.dual.fused", "--seed", "-1"},
                   {"--seed", "not a non-negative integer"});
  EXPECT_FALSE(fs::exists(out));
}

TEST(OutDir, AFileOrAnUnwritablePlaceIsExitTwo) {
  const auto file = fresh("out_is_a_file");
  std::ofstream(file) << "not a directory";
  expect_bad_input({"fuzz", "--cases", "2", "--out", file.string()}, {"cannot use --out", file.string()});
  expect_bad_input({"fuzz", "--cases", "2", "--out", "/proc/driftcheck/out"}, {"cannot use --out"});
}

// A small finished campaign of cheap mutants, copied for each corruption.
const fs::path& base_campaign() {
  static const fs::path dir = [] {
    const auto d = fresh("base");
    const Outcome r = run({"fuzz", "--backend", "mutant.concat.*,mutant.rmsnorm.oob_write", "--cases", "8",
                           "--jobs", "1", "--shrink-seconds", "0", "--out", d.string()});
    EXPECT_EQ(r.code, 1) << r.err;
    return d;
  }();
  return dir;
}
fs::path copy_of_base(const std::string& name) {
  const auto dir = fresh(name);
  fs::copy(base_campaign(), dir, fs::copy_options::recursive);
  return dir;
}

TEST(Lock, ASecondRunOnTheSameDirectoryIsRefused) {
  const auto dir = fresh("locked");
  Child first({"fuzz", "--op", "concat", "--seconds", "60", "--out", dir.string()});
  while (!fs::exists(dir / "journal.jsonl") && first.running())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  expect_bad_input({"fuzz", "--resume", "--cases", "10", "--out", dir.string()},
                   {"in use by another driftcheck run", "pid " + std::to_string(first.pid())});
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait().code, 0);
  EXPECT_EQ(run({"fuzz", "--resume", "--cases", "10", "--out", dir.string()}).code, 0);
}

// ---------------------------------------------------------------------------------------------------------------
// Journals

// The journal's lines with `edit` applied to the first line that contains `marker`.
void edit_journal(const fs::path& dir, const std::string& marker, const std::function<void(json&)>& edit) {
  std::string text;
  bool done = false;
  for (const auto& line : lines_of(slurp(dir / "journal.jsonl"))) {
    if (!done && line.find(marker) != std::string::npos) {
      json j = json::parse(line);
      edit(j);
      text += j.dump() + "\n";
      done = true;
    } else {
      text += line + "\n";
    }
  }
  ASSERT_TRUE(done) << marker;
  std::ofstream(dir / "journal.jsonl", std::ios::trunc) << text;
}

std::size_t line_of(const fs::path& dir, const std::string& marker) {
  const auto lines = lines_of(slurp(dir / "journal.jsonl"));
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find(marker) != std::string::npos) return i + 1;
  return 0;
}

std::vector<std::string> resume(const fs::path& dir) {
  return {"fuzz", "--resume", "--shrink-seconds", "0", "--out", dir.string()};
}

// A record whose field has the wrong type, is missing, or holds a bad value names file, line and field.
TEST(Journal, BadFieldsAreExitTwoNamingFileLineAndField) {
  struct Case {
    std::string name, marker;
    std::function<void(json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"type", R"("type":"progress")", [](json& j) { j["completed"] = "x"; }, "completed"},
      {"missing", R"("type":"finding")", [](json& j) { j.erase("worst_ratio"); }, "worst_ratio"},
      {"value", R"("type":"finding")", [](json& j) { j["worst_ratio"] = "abc"; }, "worst_ratio"},
      {"negative", R"("type":"finding")", [](json& j) { j["case_index"] = -3; }, "case_index"},
      {"nested", R"("type":"progress")",
       [](json& j) { j["stats"]["backends"]["mutant.concat.halves_swapped"]["run"] = "x"; },
       "stats.backends.mutant.concat.halves_swapped.run"},
      // Deferred cases are distinct local indices below "completed", ascending.
      {"deferred_type", R"("type":"progress")", [](json& j) { j["deferred"] = json::array({"1"}); },
       "deferred"},
      {"deferred_beyond", R"("type":"progress")",
       [](json& j) { j["deferred"] = json::array({j["completed"].get<std::uint64_t>()}); },
       "field 'deferred': expected ascending case indices below 'completed'"},
      {"deferred_twice", R"("type":"progress")",
       [](json& j) {
         j["deferred"] = json::array({0, 0});
       },
       "field 'deferred': expected ascending case indices below 'completed'"},
      {"unknown_type", R"("type":"bundle")", [](json& j) { j["type"] = "bundel"; }, "unknown record type"},
      {"header", R"("type":"header")", [](json& j) { j["args"]["seed"] = "one"; }, "args.seed"},
      {"compile_set_above", R"("type":"header")", [](json& j) { j["args"]["compile_set"] = 65; },
       "args.compile_set"},
      {"compile_set_negative", R"("type":"header")", [](json& j) { j["args"]["compile_set"] = -1; },
       "args.compile_set"},
      // A count beyond int64 is parsed as a double: converting it to an integer was undefined behaviour.
      {"drift_count", R"("type":"progress")",
       [](json& j) {
         for (auto& [name, b] : j["stats"]["backends"].items())
           if (b.contains("drift") && !b["drift"].empty()) {
             b["drift"].begin().value()["cases"] = 4.44e68;
             return;
           }
         FAIL() << "no backend with drift statistics";
       },
       "cases': expected an integer, got number"},
      // merge reads these; they were never checked.
      {"end", R"("type":"end")", [](json& j) { j["exit_code"] = "1"; }, "exit_code"},
      {"header_lists", R"("type":"header")", [](json& j) { j["unavailable"] = json::array({1}); },
       "header: field 'unavailable'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto dir = copy_of_base("journal_" + c.name);
    const std::size_t line = line_of(dir, c.marker);
    edit_journal(dir, c.marker, c.edit);
    expect_bad_input(resume(dir),
                     {"bad journal", (dir / "journal.jsonl").string() + ":" + std::to_string(line), c.field});
  }
}

TEST(Journal, TwoJournalsConcatenatedAreExitTwo) {
  const auto dir = copy_of_base("concatenated");
  const std::string text = slurp(dir / "journal.jsonl");
  std::ofstream(dir / "journal.jsonl", std::ios::app) << text;
  expect_bad_input(resume(dir), {"bad journal", "second header"});
}

// A journal without one complete line recorded nothing: the directory holds no campaign, and a run (with or
// without --resume) starts one.
TEST(Journal, AnEmptyOrTornHeaderStartsANewCampaign) {
  const std::string header = lines_of(slurp(base_campaign() / "journal.jsonl")).front();
  for (const std::string& content : {std::string(), header.substr(0, header.size() / 2)}) {
    for (const bool with_resume : {true, false}) {
      const auto dir = fresh("torn_header");
      fs::create_directories(dir);
      std::ofstream(dir / "journal.jsonl") << content;
      std::vector<std::string> args{"fuzz", "--op", "concat", "--cases", "4", "--out", dir.string()};
      if (with_resume) args = {"fuzz", "--resume", "--cases", "4", "--out", dir.string()};
      const Outcome r = run(args);
      // A resumed run without a journal is the default campaign, where 4 cases may leave a backend without a
      // case (exit 1); what matters is that it runs.
      EXPECT_TRUE(r.code == 0 || r.code == 1)
          << content.size() << " bytes, resume " << with_resume << ": " << r.err;
      EXPECT_EQ(report_of(dir).at("cases"), 4);
    }
  }
}

// Cut anywhere, a journal resumes: the cut line is a torn last line, dropped.
TEST(Journal, TruncatedAnywhereItResumes) {
  const std::string text = slurp(base_campaign() / "journal.jsonl");
  std::mt19937 rng(11);
  for (int i = 0; i < 8; ++i) {
    const auto cut = std::uniform_int_distribution<std::size_t>(text.find('\n') + 1, text.size() - 1)(rng);
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(text.size()));
    const auto dir = copy_of_base("truncated");
    std::ofstream(dir / "journal.jsonl", std::ios::trunc) << text.substr(0, cut);
    const Outcome r = run(resume(dir));
    EXPECT_EQ(r.code, 1) << r.err;
    expect_every_bundle_written(dir);
  }
}

// Random byte changes: a bad journal is exit 2 with one line, never an internal error or a crash.
TEST(Journal, CorruptedBytesAreExitTwoOrHarmless) {
  const std::string text = slurp(base_campaign() / "journal.jsonl");
  std::mt19937 rng(12);
  for (int i = 0; i < 12; ++i) {
    std::string bad = text;
    const auto at = std::uniform_int_distribution<std::size_t>(0, text.size() - 2)(rng);
    bad[at] = "\"{}[],:0x\\ \n"[std::uniform_int_distribution<int>(0, 11)(rng)];
    const auto dir = copy_of_base("corrupted");
    std::ofstream(dir / "journal.jsonl", std::ios::trunc) << bad;
    const Outcome r = run(resume(dir));
    EXPECT_EQ(r.signal, 0);
    EXPECT_TRUE(r.code == 1 || r.code == 0 || (r.code == 2 && lines_of(r.err).size() == 1))
        << "byte " << at << ": exit " << r.code << ": " << r.err;
  }
}

// Resuming after findings/ was deleted says so and writes every bundle it owes again.
TEST(Journal, ResumeAfterTheFindingsWereDeletedWarnsAndBundlesAgain) {
  const auto dir = copy_of_base("findings_deleted");
  fs::remove_all(dir / "findings");
  const Outcome r = run({"fuzz", "--resume", "--shrink-seconds", "0", "--out", dir.string()});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("warning: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing or out of date"), std::string::npos) << r.err;
  expect_every_bundle_written(dir);
  for (const auto& name : bundle_names(base_campaign()))
    EXPECT_EQ(slurp(dir / "findings" / name / "tensors.bin"),
              slurp(base_campaign() / "findings" / name / "tensors.bin"));
}

// ---------------------------------------------------------------------------------------------------------------
// Bundles

fs::path first_bundle(const fs::path& dir) {
  return dir / "findings" / bundle_names(dir).front();
}

void edit_json(const fs::path& file, const std::function<void(json&)>& edit) {
  json j = json::parse(slurp(file));
  edit(j);
  std::ofstream(file, std::ios::trunc) << j.dump(2);
}

TEST(Bundle, BadFieldsAreExitTwoNamingFileAndField) {
  struct Case {
    std::string name, file;
    std::function<void(json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"seed_type", "case.json", [](json& j) { j["seed"] = "x"; }, "seed"},
      {"no_spec", "case.json", [](json& j) { j.erase("spec"); }, "spec"},
      {"spec_field", "case.json", [](json& j) { j["spec"]["hidden"] = 1.5; }, "hidden"},
      // A spec claiming a huge shape is refused before anything is allocated for it.
      {"huge_rows", "case.json", [](json& j) { j["spec"]["rows"] = 1000000000000; }, "rows"},
      {"backend_type", "finding.json", [](json& j) { j["backend"] = 7; }, "backend"},
      {"ratio_value", "finding.json", [](json& j) { j["worst_ratio"] = "abc"; }, "worst_ratio"},
      {"no_verdict", "finding.json", [](json& j) { j.erase("verdict"); }, "verdict"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto bundle = first_bundle(copy_of_base("bundle_" + c.name));
    edit_json(bundle / c.file, c.edit);
    expect_bad_input({"replay", bundle.string()}, {"bad bundle", (bundle / c.file).string(), c.field});
  }
}

TEST(Bundle, TruncatedOrOversizedTensorFilesAreExitTwo) {
  const auto bundle = first_bundle(copy_of_base("bundle_tensors"));
  const std::string good = slurp(bundle / "tensors.bin");
  for (const std::size_t cut :
       {std::size_t{0}, std::size_t{7}, std::size_t{20}, good.size() / 3, good.size() - 1}) {
    std::ofstream(bundle / "tensors.bin", std::ios::trunc | std::ios::binary) << good.substr(0, cut);
    expect_bad_input({"replay", bundle.string()}, {"bad bundle", "tensors.bin"});
  }
  // The last view's offset (its last 8 bytes) moved far beyond its storage.
  std::string far = good;
  far[far.size() - 2] = 0x40;
  std::ofstream(bundle / "tensors.bin", std::ios::trunc | std::ios::binary) << far;
  expect_bad_input({"replay", bundle.string()}, {"bad bundle", "tensors.bin"});
}

// Random byte changes in tensors.bin: exit 0 or 1 (the bytes still make a case) or 2 with one line; never an
// internal error or a crash.
TEST(Bundle, CorruptedTensorBytesAreExitTwoOrReplay) {
  const auto bundle = first_bundle(copy_of_base("bundle_flips"));
  const std::string good = slurp(bundle / "tensors.bin");
  std::mt19937 rng(13);
  for (int i = 0; i < 16; ++i) {
    std::string bad = good;
    // Half the flips in the first 64 bytes (header, counts, first storage's size), half anywhere.
    const std::size_t range = i % 2 ? good.size() - 1 : 63;
    const auto at = std::uniform_int_distribution<std::size_t>(0, range)(rng);
    bad[at] = static_cast<char>(bad[at] ^ (1 << std::uniform_int_distribution<int>(0, 7)(rng)));
    std::ofstream(bundle / "tensors.bin", std::ios::trunc | std::ios::binary) << bad;
    const Outcome r = run({"replay", bundle.string()});
    EXPECT_EQ(r.signal, 0);
    EXPECT_TRUE(r.code == 0 || r.code == 1 || (r.code == 2 && lines_of(r.err).size() == 1))
        << "byte " << at << ": exit " << r.code << ": " << r.err;
  }
}

}  // namespace
}  // namespace driftcheck::testing
